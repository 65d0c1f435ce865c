-- hf_pbt_members: 2 definition(s), first recorded at commits 4953a95, 474aa78 by record.py
-- a line tagged '-- in N,M [dialect]' is in those definitions (and that dialect) only
CREATE TABLE hf_pbt_members (
	sweep VARCHAR(255) NOT NULL, 
	member INTEGER NOT NULL, 
	state VARCHAR(16) NOT NULL,  -- in 2
	params JSON NOT NULL, 
	initial JSON NOT NULL, 
	state VARCHAR(16) NOT NULL,  -- in 1
	history JSON NOT NULL,  -- in 2
	decision JSON,  -- in 2
	step INTEGER NOT NULL, 
	score FLOAT,  -- in 1
	last_check INTEGER NOT NULL,  -- in 2
	steps_trained INTEGER NOT NULL, 
	last_check INTEGER NOT NULL,  -- in 1
	generation INTEGER NOT NULL,  -- in 2
	reports INTEGER NOT NULL,  -- in 2
	failures INTEGER NOT NULL,  -- in 2
	ckpt_member INTEGER, 
	ckpt_step INTEGER, 
	reports INTEGER NOT NULL,  -- in 1
	decision JSON,  -- in 1
	generation INTEGER NOT NULL,  -- in 1
	score FLOAT,  -- in 2
	check_score FLOAT,  -- in 2
	barrier BOOLEAN NOT NULL, 
	failures INTEGER NOT NULL,  -- in 1
	check_score FLOAT,  -- in 1
	history JSON NOT NULL,  -- in 1
	updated FLOAT NOT NULL, 
	PRIMARY KEY (sweep, member)
);
