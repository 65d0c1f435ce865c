-- hf_meta as first recorded at commit f04e66f (2026-12-03) by record.py

CREATE TABLE hf_meta (
	"key" VARCHAR(64) NOT NULL, 
	value VARCHAR(255) NOT NULL, 
	PRIMARY KEY ("key")
);
