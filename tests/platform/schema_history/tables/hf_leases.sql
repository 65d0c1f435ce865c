-- hf_leases: 3 definition(s), first recorded at commits c4e4f66, 36c370a, 4ac74ce by record.py
-- a line tagged '-- in N,M [dialect]' is in those definitions (and that dialect) only
CREATE TABLE hf_leases (
	id INTEGER NOT NULL,  -- in 1,2,3 sqlite
	id SERIAL NOT NULL,  -- in 1,2,3 postgresql
	sweep VARCHAR(128) NOT NULL, 
	trial INTEGER NOT NULL, 
	host VARCHAR(255) NOT NULL, 
	pid INTEGER NOT NULL, 
	devices JSON NOT NULL, 
	started_at FLOAT NOT NULL, 
	ended_at FLOAT, 
	state VARCHAR(16), 
	worker VARCHAR(64),  -- in 2,3
	share INTEGER DEFAULT '0' NOT NULL,  -- in 3
	per_device INTEGER DEFAULT '1' NOT NULL,  -- in 3
	PRIMARY KEY (id)
);

CREATE INDEX ix_hf_leases_sweep ON hf_leases (sweep);
