-- Moderation: a tenant's unsafe / topic probability thresholds may be left unset (NULL), meaning "the served
-- model's decision defaults" (chosen on its validation split for a stated benign false-block rate).
ALTER TABLE moderation_thresholds ALTER COLUMN unsafe_threshold DROP NOT NULL;
ALTER TABLE moderation_thresholds ALTER COLUMN topic_threshold DROP NOT NULL;
