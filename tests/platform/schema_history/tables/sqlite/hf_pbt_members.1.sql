-- hf_pbt_members as first recorded at commit 4953a95 (2026-12-02) by record.py

CREATE TABLE hf_pbt_members (
	sweep VARCHAR(255) NOT NULL, 
	member INTEGER NOT NULL, 
	params JSON NOT NULL, 
	initial JSON NOT NULL, 
	state VARCHAR(16) NOT NULL, 
	step INTEGER NOT NULL, 
	score FLOAT, 
	steps_trained INTEGER NOT NULL, 
	last_check INTEGER NOT NULL, 
	ckpt_member INTEGER, 
	ckpt_step INTEGER, 
	reports INTEGER NOT NULL, 
	decision JSON, 
	generation INTEGER NOT NULL, 
	barrier BOOLEAN NOT NULL, 
	failures INTEGER NOT NULL, 
	check_score FLOAT, 
	history JSON NOT NULL, 
	updated FLOAT NOT NULL, 
	PRIMARY KEY (sweep, member)
);
