-- hf_lineage as first recorded at commit 4953a95 (2026-12-02) by record.py

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
