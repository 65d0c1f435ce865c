-- hf_pbt_populations: 1 definition(s), first recorded at commits 4953a95 by record.py
-- a line tagged '-- in N,M [dialect]' is in those definitions (and that dialect) only
CREATE TABLE hf_pbt_populations (
	sweep VARCHAR(255) NOT NULL, 
	version INTEGER NOT NULL, 
	PRIMARY KEY (sweep)
);
