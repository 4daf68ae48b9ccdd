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
	rpm INTEGER, 
	tpm INTEGER, 
	max_concurrency INTEGER, 
	priority INTEGER NOT NULL, 
	metadata JSON NOT NULL, 
	previous_hash VARCHAR(64), 
	previous_expires_at DATETIME, 
	PRIMARY KEY (id), 
	UNIQUE (name)
);
INSERT INTO "api_keys" VALUES('key_d3b4a5ec45e7426e910d7a2a','team-active','a0bbf25a85289d96070fc3302a9527e01e51342ce1c17d3e2ccbe1db1fbc4c91','dsk-9GvD…','2026-12-04 02:32:17.211903','2036-12-01 02:32:17.178098',NULL,'2026-12-04 02:32:24.274520','["deepseek-v4-flash-0731"]','[]','high',600,1000000,2,3,'{}',NULL,NULL);
INSERT INTO "api_keys" VALUES('key_27a17b9e9d544e118f5c24c7','team-revoked','4b1d61f84b400c6a015e382a932cb6046f3f12d8bc425521f50f5e49578a3755','dsk-MOjK…','2026-12-04 02:32:17.834707',NULL,'2026-12-04 02:32:18.476455',NULL,'null','[]',NULL,NULL,NULL,NULL,1,'{}',NULL,NULL);
INSERT INTO "api_keys" VALUES('key_35b1489883964898a3b5e289','team-expired','e719a067c51009a49c63c466eb91ea1b3a9ee9c3c721208d86a07edabb721a57','dsk-A52C…','2026-12-04 02:32:19.220547','2026-12-04 02:32:20.198720',NULL,NULL,'null','[]',NULL,NULL,NULL,NULL,1,'{}',NULL,NULL);
INSERT INTO "api_keys" VALUES('key_7137cf0107df47b38c23308a','ops','d4e069a03153ffbff3e3686d8cfdfcdf244aad2dd0a2477c0d16f7762912c7f4','dsk--kUh…','2026-12-04 02:32:20.066869',NULL,NULL,'2026-12-04 02:32:24.880402','null','["admin"]',NULL,NULL,NULL,NULL,1,'{}',NULL,NULL);
INSERT INTO "api_keys" VALUES('key_b3f0d8e1b12b41059905567c','team-rotated','2665258c82e6136afcd2ca6bd49755d7a6f66516dccf98e71fee06096a0a6e33','dsk-QZ6R…','2026-12-04 02:32:20.735079',NULL,NULL,'2026-12-04 02:32:26.420080','null','[]',NULL,NULL,NULL,NULL,1,'{}','9b51eec32d84e33fbd940ae99b073a2116a83c77573f1a075a7a15fbc429eb35','2036-12-01 02:32:21.411839');
INSERT INTO "api_keys" VALUES('key_617bdd209af841f9898ee372','team-api','1fd42a6a2fcc47b399f8155375b0fbc87be6ceed8984a88fb91af7592ed049be','dsk-XQE1…','2026-12-04 02:32:24.880820',NULL,NULL,'2026-12-04 02:32:26.428461','["deepseek-v4-flash-0731"]','[]',NULL,NULL,NULL,NULL,1,'{"team":"api","cost_center":17}',NULL,NULL);
INSERT INTO "api_keys" VALUES('key_62095ece7b2b4fcca538bcd9','team-api-revoked','0592e662e0cd34fdbc8a68505ab91a784f1f340e342e89d2be40acc7623d8b2c','dsk-HM8V…','2026-12-04 02:32:24.890318',NULL,'2026-12-04 02:32:24.898307',NULL,'null','[]',NULL,NULL,NULL,NULL,1,'{}',NULL,NULL);
CREATE TABLE audit_log (
	id INTEGER NOT NULL, 
	at DATETIME NOT NULL, 
	actor VARCHAR(200) NOT NULL, 
	action VARCHAR(64) NOT NULL, 
	target VARCHAR(200), 
	client VARCHAR(100), 
	detail JSON NOT NULL, 
	PRIMARY KEY (id)
);
INSERT INTO "audit_log" VALUES(1,'2026-12-04 02:32:24.886047','ops','key.create','key_617bdd209af841f9898ee372','127.0.0.1','{"name":"team-api","prefix":"dsk-XQE1…","models":["deepseek-v4-flash-0731"],"metadata":{"team":"api","cost_center":17},"actor_id":"key_7137cf0107df47b38c23308a","actor_kind":"key"}');
INSERT INTO "audit_log" VALUES(2,'2026-12-04 02:32:24.892720','ops','key.create','key_62095ece7b2b4fcca538bcd9','127.0.0.1','{"name":"team-api-revoked","prefix":"dsk-HM8V…","actor_id":"key_7137cf0107df47b38c23308a","actor_kind":"key"}');
INSERT INTO "audit_log" VALUES(3,'2026-12-04 02:32:24.900665','ops','key.revoke','key_62095ece7b2b4fcca538bcd9','127.0.0.1','{"actor_id":"key_7137cf0107df47b38c23308a","actor_kind":"key"}');
CREATE TABLE response_owners (
	response_id VARCHAR(128) NOT NULL, 
	key_id VARCHAR(40) NOT NULL, 
	created_at DATETIME NOT NULL, 
	PRIMARY KEY (response_id)
);
INSERT INTO "response_owners" VALUES('resp_3db384cb745a4eac','key_d3b4a5ec45e7426e910d7a2a','2026-12-04 02:32:24.871349');
CREATE TABLE usage_ledger (
	id INTEGER NOT NULL, 
	request_id VARCHAR(128) NOT NULL, 
	key_id VARCHAR(40) NOT NULL, 
	key_name VARCHAR(200) NOT NULL, 
	model VARCHAR(200) NOT NULL, 
	route VARCHAR(64) NOT NULL, 
	stream BOOLEAN NOT NULL, 
	arrived_at DATETIME NOT NULL, 
	status INTEGER NOT NULL, 
	finish_reason VARCHAR(32), 
	client_disconnected BOOLEAN NOT NULL, 
	prompt_tokens INTEGER NOT NULL, 
	completion_tokens INTEGER NOT NULL, 
	cached_tokens INTEGER NOT NULL, 
	reasoning_tokens INTEGER NOT NULL, 
	queue_wait_s FLOAT, 
	ttft_s FLOAT, 
	upstream_ttft_s FLOAT, 
	decode_tokens_per_s FLOAT, 
	e2e_s FLOAT, 
	spec JSON, 
	spec_candidates JSON NOT NULL, 
	PRIMARY KEY (id)
);
INSERT INTO "usage_ledger" VALUES(1,'req-7e3e0f7fa7c94b08ae918e594d8d1077','key_d3b4a5ec45e7426e910d7a2a','team-active','deepseek-v4-flash-0731','/v1/chat/completions',0,'2026-12-04 02:32:24.274732',200,'length',0,9,16,0,16,0.0,NULL,NULL,NULL,1.95445622000079310964e-01,'{"source":"metrics_delta","steps":4,"accepted_tokens":11,"draft_tokens":20,"acceptance_rate":0.55,"mean_acceptance_length":3.75,"exact":true}','[{"source":"metrics_delta","steps":4,"accepted_tokens":11,"draft_tokens":20,"acceptance_rate":0.55,"mean_acceptance_length":3.75,"exact":true}]');
INSERT INTO "usage_ledger" VALUES(2,'req-38b562ec945f4109aad4c92dade116b9','key_d3b4a5ec45e7426e910d7a2a','team-active','deepseek-v4-flash-0731','/v1/chat/completions',1,'2026-12-04 02:32:24.472165',200,'length',0,9,16,0,16,0.0,2.43482590001349308295e-02,2.40280020000227523269e-02,8.47968185410266386305e+01,2.04750203000003239139e-01,'{"source":"metrics_delta","steps":4,"accepted_tokens":11,"draft_tokens":20,"acceptance_rate":0.55,"mean_acceptance_length":3.75,"exact":true}','[{"source":"metrics_delta","steps":4,"accepted_tokens":11,"draft_tokens":20,"acceptance_rate":0.55,"mean_acceptance_length":3.75,"exact":true},{"source":"stream","steps":4,"accepted_tokens":11,"draft_tokens":20,"acceptance_rate":0.55,"mean_acceptance_length":3.75}]');
INSERT INTO "usage_ledger" VALUES(3,'req-4d1b3604791e41f09b3dd1060b302396','key_d3b4a5ec45e7426e910d7a2a','team-active','deepseek-v4-flash-0731','/v1/responses',0,'2026-12-04 02:32:24.678015',200,'length',0,9,16,0,16,0.0,NULL,NULL,NULL,1.98578731999987212475e-01,'{"source":"metrics_delta","steps":4,"accepted_tokens":11,"draft_tokens":20,"acceptance_rate":0.55,"mean_acceptance_length":3.75,"exact":true}','[{"source":"metrics_delta","steps":4,"accepted_tokens":11,"draft_tokens":20,"acceptance_rate":0.55,"mean_acceptance_length":3.75,"exact":true}]');
CREATE INDEX ix_api_keys_previous_hash ON api_keys (previous_hash);
CREATE UNIQUE INDEX ix_api_keys_key_hash ON api_keys (key_hash);
CREATE INDEX ix_audit_log_at ON audit_log (at);
CREATE INDEX ix_usage_ledger_key_id ON usage_ledger (key_id);
CREATE INDEX ix_usage_ledger_arrived_at ON usage_ledger (arrived_at);
CREATE INDEX ix_usage_ledger_request_id ON usage_ledger (request_id);
CREATE INDEX ix_response_owners_key_id ON response_owners (key_id);
COMMIT;
