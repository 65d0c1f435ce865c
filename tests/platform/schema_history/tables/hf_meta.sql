-- hf_meta: 1 definition(s), first recorded at commits f04e66f by record.py
-- a line tagged '-- in N,M [dialect]' is in those definitions (and that dialect) only
CREATE TABLE hf_meta (
	"key" VARCHAR(64) NOT NULL,  -- in 1 sqlite
	key VARCHAR(64) NOT NULL,  -- in 1 postgresql
	value VARCHAR(255) NOT NULL, 
	PRIMARY KEY ("key") -- in 1 sqlite
	PRIMARY KEY (key) -- in 1 postgresql
);
