BEGIN TRANSACTION;
CREATE TABLE api_keys (
	id VARCHAR(40) NOT NULL, 
	name VARCHAR(200) NOT NULL, 
	key_hash VARCHAR(64) NOT NULL, 
	prefix VARCHAR(32) NOT NULL, 
	created_at DATETIME NOT NULL, 
	expires_at DATETIME, 
	revoked_at DATETIME, 
	last_used_at DATETIME, 
	models JSON, 
	scopes JSON NOT NULL, 
	default_thinking VARCHAR(8), 
	PRIMARY KEY (id), 
	UNIQUE (name)
);
INSERT INTO "api_keys" VALUES('key_94ba4e03c3cf4406897b2caa','team-active','a8737e4d77aac9327e63271d8657d4becc33fff41c2a651a43961cb023e7c7e2','dsk--0kV…','2026-12-04 02:28:29.561499','2036-12-01 02:28:29.536726',NULL,'2026-12-04 02:28:34.170533','["deepseek-v4-flash-0731"]','[]','high');
INSERT INTO "api_keys" VALUES('key_f371befa9c354de48d5d38da','team-revoked','42236bb2f365a16de4831ee08abce860a24cb0e36baa05b5b5c303327419f4de','dsk--m0z…','2026-12-04 02:28:30.267327',NULL,'2026-12-04 02:28:31.037411',NULL,'null','[]',NULL);
INSERT INTO "api_keys" VALUES('key_36a42573a19d46898044b6a9','team-expired','2b15a794ef9f1d2fecbaae163aa7b714469b39904bcdf218587a9b2651ca3631','dsk-DIwj…','2026-12-04 02:28:31.753089','2026-12-04 02:28:32.735145',NULL,NULL,'null','[]',NULL);
CREATE UNIQUE INDEX ix_api_keys_key_hash ON api_keys (key_hash);
COMMIT;
