-- hf_* tables at commit a7d0f0c (2026-12-05), recorded by record.py

CREATE TABLE hf_ahead (
	sweep VARCHAR(128) NOT NULL, 
	number INTEGER NOT NULL, 
	params JSON NOT NULL, 
	made_at FLOAT NOT NULL, 
	PRIMARY KEY (sweep, number)
);

CREATE TABLE hf_gangs (
	id SERIAL NOT NULL, 
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

CREATE TABLE hf_lineage (
	id SERIAL NOT NULL, 
	sweep VARCHAR(255) NOT NULL, 
	time FLOAT NOT NULL, 
	step INTEGER NOT NULL, 
	member INTEGER NOT NULL, 
	generation INTEGER NOT NULL, 
	donor INTEGER NOT NULL, 
	donor_step INTEGER NOT NULL, 
	kind VARCHAR(16) NOT NULL, 
	old_params JSON NOT NULL, 
	new_params JSON NOT NULL, 
	member_score FLOAT, 
	donor_score FLOAT, 
	PRIMARY KEY (id), 
	CONSTRAINT uq_hf_lineage_event UNIQUE (sweep, member, generation, kind)
);

CREATE INDEX ix_hf_lineage_sweep ON hf_lineage (sweep);

CREATE TABLE hf_meta (
	key VARCHAR(64) NOT NULL, 
	value VARCHAR(255) NOT NULL, 
	PRIMARY KEY (key)
);

CREATE TABLE hf_pbt_members (
	sweep VARCHAR(255) NOT NULL, 
	member INTEGER NOT NULL, 
	state VARCHAR(16) NOT NULL, 
	params JSON NOT NULL, 
	initial JSON NOT NULL, 
	history JSON NOT NULL, 
	decision JSON, 
	step INTEGER NOT NULL, 
	last_check INTEGER NOT NULL, 
	steps_trained INTEGER NOT NULL, 
	generation INTEGER NOT NULL, 
	reports INTEGER NOT NULL, 
	failures INTEGER NOT NULL, 
	ckpt_member INTEGER, 
	ckpt_step INTEGER, 
	score FLOAT, 
	check_score FLOAT, 
	barrier BOOLEAN NOT NULL, 
	updated FLOAT NOT NULL, 
	PRIMARY KEY (sweep, member)
);

CREATE TABLE hf_pbt_populations (
	sweep VARCHAR(255) NOT NULL, 
	version INTEGER NOT NULL, 
	PRIMARY KEY (sweep)
);

CREATE TABLE hf_sweeps (
	name VARCHAR(128) NOT NULL, 
	study_name VARCHAR(256) NOT NULL, 
	config JSON NOT NULL, 
	created_at FLOAT NOT NULL, 
	updated_at FLOAT NOT NULL, 
	status VARCHAR(32) NOT NULL, 
	mlflow_experiment_id VARCHAR(64), 
	mlflow_parent_run_id VARCHAR(64), 
	PRIMARY KEY (name)
);

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

CREATE INDEX ix_hf_trials_sweep_state ON hf_trials (sweep, state);

CREATE INDEX ix_hf_trials_worker_state ON hf_trials (worker, state);

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

INSERT INTO hf_meta (key, value) VALUES ('schema_version', '4');
