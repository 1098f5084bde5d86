-- Host directory, migration 2: per-space access grants beside the owner.
-- The owner (spaces.owner) always has full access; a grant gives another
-- principal 'read' (track, read) or 'write' (also send events, deploy).
CREATE TABLE grants (
    space  TEXT NOT NULL REFERENCES spaces(id),
    did    TEXT NOT NULL,
    access TEXT NOT NULL CHECK (access IN ('read', 'write')),
    PRIMARY KEY (space, did)
) WITHOUT ROWID;
