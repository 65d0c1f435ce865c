-- hf_ahead as first recorded at commit a7d0f0c (2026-12-05) by record.py

CREATE TABLE hf_ahead (
	sweep VARCHAR(128) NOT NULL, 
	number INTEGER NOT NULL, 
	params JSON NOT NULL, 
	made_at FLOAT NOT NULL, 
	PRIMARY KEY (sweep, number)
);
