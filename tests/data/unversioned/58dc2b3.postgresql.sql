--
-- PostgreSQL database dump
--


-- Dumped from database version 15.20 (Debian 15.20-0+deb12u1)
-- Dumped by pg_dump version 15.20 (Debian 15.20-0+deb12u1)

SET statement_timeout = 0;
SET lock_timeout = 0;
SET idle_in_transaction_session_timeout = 0;
SET client_encoding = 'UTF8';
SET standard_conforming_strings = on;
SELECT pg_catalog.set_config('search_path', '', false);
SET check_function_bodies = false;
SET xmloption = content;
SET client_min_messages = warning;
SET row_security = off;

SET default_tablespace = '';

SET default_table_access_method = heap;

--
-- Name: api_keys; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.api_keys (
    id character varying(40) NOT NULL,
    name character varying(200) NOT NULL,
    key_hash character varying(64) NOT NULL,
    prefix character varying(32) NOT NULL,
    created_at timestamp with time zone NOT NULL,
    expires_at timestamp with time zone,
    revoked_at timestamp with time zone,
    last_used_at timestamp with time zone,
    models json,
    scopes json NOT NULL,
    default_thinking character varying(8),
    rpm integer,
    tpm integer,
    max_concurrency integer,
    priority integer NOT NULL,
    metadata json NOT NULL,
    previous_hash character varying(64),
    previous_expires_at timestamp with time zone
);


--
-- Name: audit_log; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.audit_log (
    id integer NOT NULL,
    at timestamp with time zone NOT NULL,
    actor character varying(200) NOT NULL,
    action character varying(64) NOT NULL,
    target character varying(200),
    client character varying(100),
    detail json NOT NULL
);


--
-- Name: audit_log_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

CREATE SEQUENCE public.audit_log_id_seq
    AS integer
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;


--
-- Name: audit_log_id_seq; Type: SEQUENCE OWNED BY; Schema: public; Owner: -
--

ALTER SEQUENCE public.audit_log_id_seq OWNED BY public.audit_log.id;


--
-- Name: usage_ledger; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.usage_ledger (
    id integer NOT NULL,
    request_id character varying(128) NOT NULL,
    key_id character varying(40) NOT NULL,
    key_name character varying(200) NOT NULL,
    model character varying(200) NOT NULL,
    route character varying(64) NOT NULL,
    stream boolean NOT NULL,
    arrived_at timestamp with time zone NOT NULL,
    status integer NOT NULL,
    finish_reason character varying(32),
    client_disconnected boolean NOT NULL,
    prompt_tokens integer NOT NULL,
    completion_tokens integer NOT NULL,
    cached_tokens integer NOT NULL,
    reasoning_tokens integer NOT NULL,
    queue_wait_s double precision,
    ttft_s double precision,
    upstream_ttft_s double precision,
    decode_tokens_per_s double precision,
    e2e_s double precision,
    spec json,
    spec_candidates json NOT NULL
);


--
-- Name: usage_ledger_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

CREATE SEQUENCE public.usage_ledger_id_seq
    AS integer
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;


--
-- Name: usage_ledger_id_seq; Type: SEQUENCE OWNED BY; Schema: public; Owner: -
--

ALTER SEQUENCE public.usage_ledger_id_seq OWNED BY public.usage_ledger.id;


--
-- Name: audit_log id; Type: DEFAULT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.audit_log ALTER COLUMN id SET DEFAULT nextval('public.audit_log_id_seq'::regclass);


--
-- Name: usage_ledger id; Type: DEFAULT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.usage_ledger ALTER COLUMN id SET DEFAULT nextval('public.usage_ledger_id_seq'::regclass);


--
-- Data for Name: api_keys; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.api_keys VALUES ('key_c1de2cc0fd60417a8debcd58', 'team-revoked', '2645ff32dac78f27ff061493fb63033c00ecb869726b37edb3a37bf0dc0a750c', 'dsk-R3rE…', '2026-12-04 02:31:35.365878+00', NULL, '2026-12-04 02:31:36.472752+00', NULL, 'null', '[]', NULL, NULL, NULL, NULL, 1, '{}', NULL, NULL);
INSERT INTO public.api_keys VALUES ('key_389a8539ad4545d6802e4c56', 'team-expired', '105ab4a05144a16403ab0a3a7a606c6467aa44fc10cd10ee44f26a77a61c86f3', 'dsk-QlrZ…', '2026-12-04 02:31:37.599786+00', '2026-12-04 02:31:38.479537+00', NULL, NULL, 'null', '[]', NULL, NULL, NULL, NULL, 1, '{}', NULL, NULL);
INSERT INTO public.api_keys VALUES ('key_b7b3584af3b54787ae9bf05f', 'team-active', 'c96d0a048d64f3efaf4171e0d80056989f68537ecf63cafdc57d5f0d0e55a045', 'dsk-22b4…', '2026-12-04 02:31:33.874311+00', '2036-12-01 02:31:33.716694+00', NULL, '2026-12-04 02:31:43.784897+00', '["deepseek-v4-flash-0731"]', '[]', 'high', 600, 1000000, 2, 3, '{}', NULL, NULL);
INSERT INTO public.api_keys VALUES ('key_de53502dd57a4ef0ba6ae11c', 'ops', 'b857998ed94bfde9056e49777a9bcb1282be128db1442c36e1af3dd2d6d28055', 'dsk-72o1…', '2026-12-04 02:31:38.650589+00', NULL, NULL, '2026-12-04 02:31:44.205446+00', 'null', '["admin"]', NULL, NULL, NULL, NULL, 1, '{}', NULL, NULL);
INSERT INTO public.api_keys VALUES ('key_7d02d54de1a9439d971ad8e5', 'team-api-revoked', 'c600e1aa0867633b97576fc3f24f918acb4e4e4e369d77b0dac51020647a70de', 'dsk-9_nN…', '2026-12-04 02:31:44.237763+00', NULL, '2026-12-04 02:31:44.253245+00', NULL, 'null', '[]', NULL, NULL, NULL, NULL, 1, '{}', NULL, NULL);
INSERT INTO public.api_keys VALUES ('key_c4a492b005d44c06ae0db564', 'team-rotated', '8e11e2289be27b7450cafd75d3233ae9111e4d2031a4fc8ab4f0384a115002ea', 'dsk-eZoP…', '2026-12-04 02:31:39.793648+00', NULL, NULL, '2026-12-04 02:31:45.774393+00', 'null', '[]', NULL, NULL, NULL, NULL, 1, '{}', '4432b3d0677766240618fce59d59818efb18f04569be7d1f2eb71ba9772efb08', '2036-12-01 02:31:40.836551+00');
INSERT INTO public.api_keys VALUES ('key_caf1ff10651747ca99698eb6', 'team-api', 'ae059787d14d554332bf888ebb5916bab54cfc07344785fbbef0de080bfd13e3', 'dsk-gp95…', '2026-12-04 02:31:44.205749+00', NULL, NULL, '2026-12-04 02:31:45.781497+00', '["deepseek-v4-flash-0731"]', '[]', NULL, NULL, NULL, NULL, 1, '{"team":"api","cost_center":17}', NULL, NULL);


--
-- Data for Name: audit_log; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.audit_log VALUES (1, '2026-12-04 02:31:44.221922+00', 'ops', 'key.create', 'key_caf1ff10651747ca99698eb6', '127.0.0.1', '{"name":"team-api","prefix":"dsk-gp95…","models":["deepseek-v4-flash-0731"],"metadata":{"team":"api","cost_center":17}}');
INSERT INTO public.audit_log VALUES (2, '2026-12-04 02:31:44.243414+00', 'ops', 'key.create', 'key_7d02d54de1a9439d971ad8e5', '127.0.0.1', '{"name":"team-api-revoked","prefix":"dsk-9_nN…"}');
INSERT INTO public.audit_log VALUES (3, '2026-12-04 02:31:44.255409+00', 'ops', 'key.revoke', 'key_7d02d54de1a9439d971ad8e5', '127.0.0.1', '{}');


--
-- Data for Name: usage_ledger; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.usage_ledger VALUES (1, 'req-37c7f1974e1e4eb9b0765728c3020c7f', 'key_b7b3584af3b54787ae9bf05f', 'team-active', 'deepseek-v4-flash-0731', '/v1/chat/completions', false, '2026-12-04 02:31:43.784959+00', 200, 'length', false, 9, 16, 0, 16, 0, NULL, NULL, NULL, 0.20718137399990155, '{"source":"metrics_delta","steps":4,"accepted_tokens":11,"draft_tokens":20,"acceptance_rate":0.55,"mean_acceptance_length":3.75,"exact":true}', '[{"source":"metrics_delta","steps":4,"accepted_tokens":11,"draft_tokens":20,"acceptance_rate":0.55,"mean_acceptance_length":3.75,"exact":true}]');
INSERT INTO public.usage_ledger VALUES (2, 'req-685d8249ea0948a29781e1b92e4946cc', 'key_b7b3584af3b54787ae9bf05f', 'team-active', 'deepseek-v4-flash-0731', '/v1/chat/completions', true, '2026-12-04 02:31:43.986628+00', 200, 'length', false, 9, 16, 0, 16, 0, 0.029965533999984473, 0.02967381899998145, 83.1788429578123, 0.21759209199990437, '{"source":"metrics_delta","steps":4,"accepted_tokens":11,"draft_tokens":20,"acceptance_rate":0.55,"mean_acceptance_length":3.75,"exact":true}', '[{"source":"metrics_delta","steps":4,"accepted_tokens":11,"draft_tokens":20,"acceptance_rate":0.55,"mean_acceptance_length":3.75,"exact":true},{"source":"stream","steps":4,"accepted_tokens":11,"draft_tokens":20,"acceptance_rate":0.55,"mean_acceptance_length":3.75}]');


--
-- Name: audit_log_id_seq; Type: SEQUENCE SET; Schema: public; Owner: -
--

SELECT pg_catalog.setval('public.audit_log_id_seq', 3, true);


--
-- Name: usage_ledger_id_seq; Type: SEQUENCE SET; Schema: public; Owner: -
--

SELECT pg_catalog.setval('public.usage_ledger_id_seq', 2, true);


--
-- Name: api_keys api_keys_name_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.api_keys
    ADD CONSTRAINT api_keys_name_key UNIQUE (name);


--
-- Name: api_keys api_keys_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.api_keys
    ADD CONSTRAINT api_keys_pkey PRIMARY KEY (id);


--
-- Name: audit_log audit_log_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.audit_log
    ADD CONSTRAINT audit_log_pkey PRIMARY KEY (id);


--
-- Name: usage_ledger usage_ledger_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.usage_ledger
    ADD CONSTRAINT usage_ledger_pkey PRIMARY KEY (id);


--
-- Name: ix_api_keys_key_hash; Type: INDEX; Schema: public; Owner: -
--

CREATE UNIQUE INDEX ix_api_keys_key_hash ON public.api_keys USING btree (key_hash);


--
-- Name: ix_api_keys_previous_hash; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ix_api_keys_previous_hash ON public.api_keys USING btree (previous_hash);


--
-- Name: ix_audit_log_at; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ix_audit_log_at ON public.audit_log USING btree (at);


--
-- Name: ix_usage_ledger_arrived_at; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ix_usage_ledger_arrived_at ON public.usage_ledger USING btree (arrived_at);


--
-- Name: ix_usage_ledger_key_id; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ix_usage_ledger_key_id ON public.usage_ledger USING btree (key_id);


--
-- Name: ix_usage_ledger_request_id; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ix_usage_ledger_request_id ON public.usage_ledger USING btree (request_id);


--
-- PostgreSQL database dump complete
--


