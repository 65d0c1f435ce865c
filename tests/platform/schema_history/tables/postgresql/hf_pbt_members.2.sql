-- hf_pbt_members as first recorded at commit 474aa78 (2026-12-05) by record.py

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
