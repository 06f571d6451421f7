-- A log-position clock for "as of" (docs/lineage.md): one sequence per generation, advanced by
-- every row the projectors write, so a past turn is rebuilt by comparing positions rather than
-- wall-clock times (no dependence on the API's and PostgreSQL's clocks, nor on two rows written
-- within one clock tick or one transaction's now()). The API reads the clock when it serves a
-- context and records the position in context.served.
-- Rows that existed before this migration get positions in table order (no history to recover).
CREATE SEQUENCE projection_clock;

ALTER TABLE messages ADD COLUMN projected_pos bigint NOT NULL DEFAULT nextval('projection_clock');
ALTER TABLE conversation_chunks ADD COLUMN created_pos bigint NOT NULL DEFAULT nextval('projection_clock');
ALTER TABLE fact_history ADD COLUMN pos bigint NOT NULL DEFAULT nextval('projection_clock');
ALTER TABLE topic_activations ADD COLUMN projected_pos bigint NOT NULL DEFAULT nextval('projection_clock');
ALTER TABLE topic_compactions ADD COLUMN projected_pos bigint NOT NULL DEFAULT nextval('projection_clock');
ALTER TABLE topic_assignments ADD COLUMN projected_pos bigint NOT NULL DEFAULT nextval('projection_clock');
-- Summaries: when the row appeared, and when its status last changed (completed or failed).
ALTER TABLE memory ADD COLUMN created_pos bigint NOT NULL DEFAULT nextval('projection_clock');
ALTER TABLE memory ADD COLUMN status_pos bigint;
UPDATE memory SET status_pos = created_pos WHERE status <> 'processing';
-- Facts: when the row appeared, was superseded, was deleted.
ALTER TABLE facts ADD COLUMN created_pos bigint NOT NULL DEFAULT nextval('projection_clock');
ALTER TABLE facts ADD COLUMN valid_to_pos bigint;
ALTER TABLE facts ADD COLUMN deleted_pos bigint;
UPDATE facts SET valid_to_pos = created_pos WHERE valid_to IS NOT NULL;
UPDATE facts SET deleted_pos = created_pos WHERE deleted_at IS NOT NULL;

CREATE FUNCTION memory_status_pos() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    IF NEW.status <> 'processing' AND (TG_OP = 'INSERT' OR NEW.status IS DISTINCT FROM OLD.status) THEN
        NEW.status_pos := nextval('projection_clock');
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER memory_status_pos BEFORE INSERT OR UPDATE OF status ON memory
    FOR EACH ROW EXECUTE FUNCTION memory_status_pos();

CREATE FUNCTION facts_validity_pos() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    IF NEW.valid_to IS NOT NULL AND (TG_OP = 'INSERT' OR OLD.valid_to IS NULL) THEN
        NEW.valid_to_pos := nextval('projection_clock');
    END IF;
    IF NEW.deleted_at IS NOT NULL AND (TG_OP = 'INSERT' OR OLD.deleted_at IS NULL) THEN
        NEW.deleted_pos := nextval('projection_clock');
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER facts_validity_pos BEFORE INSERT OR UPDATE OF valid_to, deleted_at ON facts
    FOR EACH ROW EXECUTE FUNCTION facts_validity_pos();
