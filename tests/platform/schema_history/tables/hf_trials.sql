-- hf_trials: 3 definition(s), first recorded at commits 4953a95, 36c370a, d29ea51 by record.py
-- a line tagged '-- in N,M [dialect]' is in those definitions (and that dialect) only
CREATE TABLE hf_trials (
	id INTEGER NOT NULL,  -- in 1,2,3 sqlite
	id SERIAL NOT NULL,  -- in 1,2,3 postgresql
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
	worker VARCHAR(64),  -- in 2,3
	retries INTEGER NOT NULL,  -- in 2,3
	notes TEXT,  -- in 2,3
	PRIMARY KEY (id), 
	UNIQUE (sweep, number), 
	FOREIGN KEY(sweep) REFERENCES hf_sweeps (name)
);

CREATE INDEX ix_hf_trials_sweep ON hf_trials (sweep);
 -- in 3
CREATE INDEX ix_hf_trials_sweep_state ON hf_trials (sweep, state); -- in 3
 -- in 3
CREATE INDEX ix_hf_trials_worker_state ON hf_trials (worker, state); -- in 3
