-- memory_items' statistics on UPDATE count only the rows whose counted columns changed
-- (docs/scaling.md, replay12). A message's vector lands after its text (the message index
-- projector, or a batch replay's message index step after the messages' COPY): the UPDATE that
-- sets the embedding leaves content_tsv and the scope as they were, yet 0020's trigger unnested
-- both the old and the new tsvector of every such row (+1 and -1 per lexeme, summed to nothing)
-- and ran the lexicon's and the scopes' clean-up statements for them. Here the old (-1) and new
-- (+1) rows are summed per key and counted columns first: a row whose key, scope and tsvector
-- are the same before and after sums to 0 and is left out, which changes no count (each key,
-- memory_items' primary key, is at most once in old_rows and once in new_rows). One sort of the
-- statement's rows, no join (a join of the two transition tables cost more than it saved).
CREATE OR REPLACE FUNCTION memory_items_updated() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    PERFORM memory_statistics_apply(array_agg(tenant_id), array_agg(user_id), array_agg(subject_id),
                                    array_agg(shared), array_agg(content_tsv), array_agg(d))
    FROM (SELECT tenant_id, user_id, subject_id, shared, content_tsv, sum(d)::integer AS d
          FROM (SELECT n.tenant_id, n.kind, n.item_id, n.user_id, n.subject_id, n.shared, n.content_tsv, 1 AS d
                FROM new_rows n WHERE n.content IS NOT NULL
                UNION ALL
                SELECT o.tenant_id, o.kind, o.item_id, o.user_id, o.subject_id, o.shared, o.content_tsv, -1
                FROM old_rows o WHERE o.content IS NOT NULL) y
          GROUP BY tenant_id, kind, item_id, user_id, subject_id, shared, content_tsv
          HAVING sum(d) <> 0) x
    HAVING count(*) > 0;
    RETURN NULL;
END $$;
