-- hf_gangs: 1 definition(s), first recorded at commits 36c370a by record.py
-- a line tagged '-- in N,M [dialect]' is in those definitions (and that dialect) only
CREATE TABLE hf_gangs (
	id INTEGER NOT NULL,  -- in 1 sqlite
	id SERIAL NOT NULL,  -- in 1 postgresql
	sweep VARCHAR(128) NOT NULL, 
	trial INTEGER NOT NULL, 
	attempt INTEGER NOT NULL, 
	nodes INTEGER NOT NULL, 
	per_node INTEGER NOT NULL, 
	endpoint VARCHAR(255) NOT NULL, 
	rdzv_id VARCHAR(255) NOT NULL, 
	spec JSON NOT NULL, 
	members JSON NOT NULL, 
	deadline FLOAT NOT NULL, 
	state VARCHAR(16) NOT NULL, 
	PRIMARY KEY (id), 
	UNIQUE (sweep, trial, attempt)
);

CREATE INDEX ix_hf_gangs_sweep ON hf_gangs (sweep);
