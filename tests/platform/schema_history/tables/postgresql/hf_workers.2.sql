-- hf_workers as first recorded at commit 6754024 (2026-12-05) by record.py

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
	job_id VARCHAR(64), 
	job_state VARCHAR(32), 
	job_reason TEXT, 
	PRIMARY KEY (id)
);
