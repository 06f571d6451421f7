-- memory_items' statistics on UPDATE count only the rows whose counted columns changed
-- (docs/scaling.md, replay12). A message's vector lands after its text (the message index
-- projector, or a batch replay's message index step after the messages' COPY): the UPDATE that
-- sets the embedding leaves content_tsv and the scope as they were, yet 0020's trigger unnested
-- both the old and the new tsvector of every such row (+1 and -1 per lexeme, summed to nothing)
-- and ran the lexicon's and the scopes' clean-up statements for them. A row whose key, content
-- presence, scope and tsvector are the same before and after adds +1 and -1 of the same keys:
-- leaving both out changes no count. memory_items' key (tenant_id, kind, item_id) is its
-- primary key, so each key is at most once in old_rows and once in new_rows.
CREATE OR REPLACE FUNCTION memory_items_updated() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    PERFORM memory_statistics_apply(array_agg(tenant_id), array_agg(user_id), array_agg(subject_id),
                                    array_agg(shared), array_agg(content_tsv), array_agg(d))
    FROM (SELECT n.tenant_id, n.user_id, n.subject_id, n.shared, n.content_tsv, 1 AS d
          FROM new_rows n LEFT JOIN old_rows o USING (tenant_id, kind, item_id)
          WHERE n.content IS NOT NULL
          AND (o.content IS NULL OR (o.user_id, o.subject_id, o.shared, o.content_tsv)
                                    IS DISTINCT FROM (n.user_id, n.subject_id, n.shared, n.content_tsv))
          UNION ALL
          SELECT o.tenant_id, o.user_id, o.subject_id, o.shared, o.content_tsv, -1
          FROM old_rows o LEFT JOIN new_rows n USING (tenant_id, kind, item_id)
          WHERE o.content IS NOT NULL
          AND (n.content IS NULL OR (o.user_id, o.subject_id, o.shared, o.content_tsv)
                                    IS DISTINCT FROM (n.user_id, n.subject_id, n.shared, n.content_tsv))) x
    HAVING count(*) > 0;
    RETURN NULL;
END $$;
