-- hf_sweeps as first recorded at commit 4953a95 (2026-12-02) by record.py

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
