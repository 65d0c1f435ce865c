-- hf_pbt_populations as first recorded at commit 4953a95 (2026-12-02) by record.py

CREATE TABLE hf_pbt_populations (
	sweep VARCHAR(255) NOT NULL, 
	version INTEGER NOT NULL, 
	PRIMARY KEY (sweep)
);
