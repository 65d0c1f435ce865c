-- Run once by the postgres image on an empty data volume (docker-entrypoint-initdb.d):
-- MLflow's tables live in a database of their own, beside the sweeps' (POSTGRES_DB).
CREATE DATABASE mlflow;
