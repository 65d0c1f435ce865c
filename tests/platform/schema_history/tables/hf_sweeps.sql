-- hf_sweeps: 1 definition(s), first recorded at commits 4953a95 by record.py
-- a line tagged '-- in N,M [dialect]' is in those definitions (and that dialect) only
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
