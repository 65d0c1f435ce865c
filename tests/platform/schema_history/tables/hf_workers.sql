-- hf_workers: 2 definition(s), first recorded at commits 36c370a, 6754024 by record.py
-- a line tagged '-- in N,M [dialect]' is in those definitions (and that dialect) only
CREATE TABLE hf_workers (
	id VARCHAR(64) NOT NULL, 
	host VARCHAR(255) NOT NULL, 
	pid INTEGER NOT NULL, 
	pool VARCHAR(128) NOT NULL, 
	devices JSON NOT NULL, 
	address VARCHAR(255), 
	sweeps JSON, 
	started_at FLOAT NOT NULL, 
	heartbeat_at FLOAT NOT NULL, 
	state VARCHAR(16) NOT NULL, 
	job_id VARCHAR(64),  -- in 2
	job_state VARCHAR(32),  -- in 2
	job_reason TEXT,  -- in 2
	PRIMARY KEY (id)
);
