-- hf_gangs as first recorded at commit 36c370a (2026-12-03) by record.py

CREATE TABLE hf_gangs (
	id INTEGER NOT NULL, 
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
