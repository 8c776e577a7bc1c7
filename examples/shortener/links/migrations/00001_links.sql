-- The shortener's links (examples/shortener). Unqualified names: the
-- shortener runs its migrations with search_path set to its own schema
-- (--schema, default shortener), apart from floodgate's.

-- +goose Up
CREATE TABLE links (
    code       text PRIMARY KEY,
    url        text NOT NULL UNIQUE,   -- one code per URL: repeating a URL does not use up codes
    created_at timestamptz NOT NULL DEFAULT now(),
    creator_ip text NOT NULL
);

-- +goose Down
DROP TABLE links;
