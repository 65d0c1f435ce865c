-- hf_leases as first recorded at commit 4ac74ce (2026-12-05) by record.py

CREATE TABLE hf_leases (
	id SERIAL NOT NULL, 
	sweep VARCHAR(128) NOT NULL, 
	trial INTEGER NOT NULL, 
	host VARCHAR(255) NOT NULL, 
	pid INTEGER NOT NULL, 
	devices JSON NOT NULL, 
	started_at FLOAT NOT NULL, 
	ended_at FLOAT, 
	state VARCHAR(16), 
	worker VARCHAR(64), 
	share INTEGER DEFAULT '0' NOT NULL, 
	per_device INTEGER DEFAULT '1' NOT NULL, 
	PRIMARY KEY (id)
);

CREATE INDEX ix_hf_leases_sweep ON hf_leases (sweep);
