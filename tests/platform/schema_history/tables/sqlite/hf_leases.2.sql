-- hf_leases as first recorded at commit 36c370a (2026-12-03) by record.py

CREATE TABLE hf_leases (
	id INTEGER NOT NULL, 
	sweep VARCHAR(128) NOT NULL, 
	trial INTEGER NOT NULL, 
	host VARCHAR(255) NOT NULL, 
	pid INTEGER NOT NULL, 
	devices JSON NOT NULL, 
	started_at FLOAT NOT NULL, 
	ended_at FLOAT, 
	state VARCHAR(16), 
	worker VARCHAR(64), 
	PRIMARY KEY (id)
);

CREATE INDEX ix_hf_leases_sweep ON hf_leases (sweep);
