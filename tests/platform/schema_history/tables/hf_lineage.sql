-- hf_lineage: 1 definition(s), first recorded at commits 4953a95 by record.py
-- a line tagged '-- in N,M [dialect]' is in those definitions (and that dialect) only
CREATE TABLE hf_lineage (
	id INTEGER NOT NULL,  -- in 1 sqlite
	id SERIAL NOT NULL,  -- in 1 postgresql
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
