-- PostgreSQL store, migration 6: who else may use a space. The owner is
-- `spaces.owner`; a grant gives another DID read or write access. Each
-- change bumps `store_meta.grants_version` in the same transaction, so
-- every host's open sessions notice a revocation made through any host.

CREATE TABLE grants (
    space  TEXT NOT NULL REFERENCES spaces (id),
    did    TEXT NOT NULL,
    access TEXT NOT NULL CHECK (access IN ('read', 'write')),
    PRIMARY KEY (space, did)
);
