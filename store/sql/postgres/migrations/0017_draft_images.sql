-- The image a draft version shows and sends (an http(s) URL taken from the feed or the
-- article page), or NULL: none found, or an operator removed it from this version.

ALTER TABLE drafts ADD COLUMN image_url TEXT;
