-- hf_trials as first recorded at commit 36c370a (2026-12-03) by record.py

CREATE TABLE hf_trials (
	id SERIAL NOT NULL, 
	sweep VARCHAR(128) NOT NULL, 
	number INTEGER NOT NULL, 
	state VARCHAR(16) NOT NULL, 
	params JSON NOT NULL, 
	host VARCHAR(255), 
	pid INTEGER, 
	heartbeat_at FLOAT, 
	started_at FLOAT, 
	ended_at FLOAT, 
	attempts INTEGER NOT NULL, 
	last_step INTEGER, 
	metrics JSON NOT NULL, 
	outcome VARCHAR(16), 
	error TEXT, 
	mlflow_run_id VARCHAR(64), 
	log_path TEXT, 
	trial_dir TEXT, 
	worker VARCHAR(64), 
	retries INTEGER NOT NULL, 
	notes TEXT, 
	PRIMARY KEY (id), 
	UNIQUE (sweep, number), 
	FOREIGN KEY(sweep) REFERENCES hf_sweeps (name)
);

CREATE INDEX ix_hf_trials_sweep ON hf_trials (sweep);
