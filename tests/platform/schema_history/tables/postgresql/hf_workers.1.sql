-- hf_workers as first recorded at commit 36c370a (2026-12-03) by record.py

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
	PRIMARY KEY (id)
);
