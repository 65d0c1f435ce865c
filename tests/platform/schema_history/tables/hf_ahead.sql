-- hf_ahead: 1 definition(s), first recorded at commits a7d0f0c by record.py
-- a line tagged '-- in N,M [dialect]' is in those definitions (and that dialect) only
CREATE TABLE hf_ahead (
	sweep VARCHAR(128) NOT NULL, 
	number INTEGER NOT NULL, 
	params JSON NOT NULL, 
	made_at FLOAT NOT NULL, 
	PRIMARY KEY (sweep, number)
);
