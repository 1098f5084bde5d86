-- Fleet database, migration 15: the host registry. A host writes where it
-- can be reached and its public key beside its heartbeat row, so another
-- host can relay a client to it and it can check who relays to it
-- (spec/fleet.md, "The relay"). NULL for a host that serves no relay (an
-- operator command's store, a host of an earlier version).
ALTER TABLE hosts ADD COLUMN advertise TEXT;
ALTER TABLE hosts ADD COLUMN did TEXT;
