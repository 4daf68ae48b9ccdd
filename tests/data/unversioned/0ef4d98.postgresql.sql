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
-- Name: response_owners; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.response_owners (
    response_id character varying(128) NOT NULL,
    key_id character varying(40) NOT NULL,
    created_at timestamp with time zone NOT NULL
);


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

INSERT INTO public.api_keys VALUES ('key_8de94d480366459b9911f535', 'team-revoked', '9b5dadacda9f9f1ee798c51e2b04ca2b21c75266d2292f436756349fef744e46', 'dsk-QfcJ…', '2026-12-04 02:32:30.202341+00', NULL, '2026-12-04 02:32:31.025467+00', NULL, 'null', '[]', NULL, NULL, NULL, NULL, 1, '{}', NULL, NULL);
INSERT INTO public.api_keys VALUES ('key_1fd7572639d14f41bc8f26a1', 'team-expired', 'e47bc877c25d71c713089d2b391d91c64ecabfb5a7f15e9e0acea476d335f717', 'dsk-vOSg…', '2026-12-04 02:32:31.813056+00', '2026-12-04 02:32:32.750766+00', NULL, NULL, 'null', '[]', NULL, NULL, NULL, NULL, 1, '{}', NULL, NULL);
INSERT INTO public.api_keys VALUES ('key_e0036e9c2bfb4fa5ab54beb3', 'team-active', '520193b8f3886155b5e2cc0bff4498a5063a2ea7c89032a8eee3e525b75f18b5', 'dsk-mm8m…', '2026-12-04 02:32:29.220926+00', '2036-12-01 02:32:29.126313+00', NULL, '2026-12-04 02:32:37.123966+00', '["deepseek-v4-flash-0731"]', '[]', 'high', 600, 1000000, 2, 3, '{}', NULL, NULL);
INSERT INTO public.api_keys VALUES ('key_5de65d3b1736406090a87bdb', 'ops', '9511f7981d917a63eb05b1defb921302d1ea87105df902dd7aa5477f7312dd94', 'dsk-yEmZ…', '2026-12-04 02:32:32.656183+00', NULL, NULL, '2026-12-04 02:32:37.735035+00', 'null', '["admin"]', NULL, NULL, NULL, NULL, 1, '{}', NULL, NULL);
INSERT INTO public.api_keys VALUES ('key_5381f26779bc4599ada18c68', 'team-api-revoked', '4a0a53657d70356202cf17ddeec12c1ed26aff231ebb87696108d5e3289e3f16', 'dsk-uoJ5…', '2026-12-04 02:32:37.746638+00', NULL, '2026-12-04 02:32:37.75565+00', NULL, 'null', '[]', NULL, NULL, NULL, NULL, 1, '{}', NULL, NULL);
INSERT INTO public.api_keys VALUES ('key_9cdb31d849244a66a096afb1', 'team-rotated', 'ea7a0ff3c75b8884ab38bb0ab1acb2134307ca35d4878387bd8e4d330a90b66c', 'dsk-wqEX…', '2026-12-04 02:32:33.513276+00', NULL, NULL, '2026-12-04 02:32:39.283136+00', 'null', '[]', NULL, NULL, NULL, NULL, 1, '{}', 'f322b1e82e4723d75bde39df1a376019df40512a883d2566a799909df58f16cc', '2036-12-01 02:32:34.262144+00');
INSERT INTO public.api_keys VALUES ('key_dc042ec2ed8b4cc0a0eceb1a', 'team-api', '2e4c450b66166c63a9a5c3088c1463d00b2087747b6971697c28288c4659bd12', 'dsk-e5ll…', '2026-12-04 02:32:37.735579+00', NULL, NULL, '2026-12-04 02:32:39.293218+00', '["deepseek-v4-flash-0731"]', '[]', NULL, NULL, NULL, NULL, 1, '{"team":"api","cost_center":17}', NULL, NULL);


--
-- Data for Name: audit_log; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.audit_log VALUES (1, '2026-12-04 02:32:37.740988+00', 'ops', 'key.create', 'key_dc042ec2ed8b4cc0a0eceb1a', '127.0.0.1', '{"name":"team-api","prefix":"dsk-e5ll…","models":["deepseek-v4-flash-0731"],"metadata":{"team":"api","cost_center":17},"actor_id":"key_5de65d3b1736406090a87bdb","actor_kind":"key"}');
INSERT INTO public.audit_log VALUES (2, '2026-12-04 02:32:37.749717+00', 'ops', 'key.create', 'key_5381f26779bc4599ada18c68', '127.0.0.1', '{"name":"team-api-revoked","prefix":"dsk-uoJ5…","actor_id":"key_5de65d3b1736406090a87bdb","actor_kind":"key"}');
INSERT INTO public.audit_log VALUES (3, '2026-12-04 02:32:37.758186+00', 'ops', 'key.revoke', 'key_5381f26779bc4599ada18c68', '127.0.0.1', '{"actor_id":"key_5de65d3b1736406090a87bdb","actor_kind":"key"}');


--
-- Data for Name: response_owners; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.response_owners VALUES ('resp_0890ecf185f8417f', 'key_e0036e9c2bfb4fa5ab54beb3', '2026-12-04 02:32:37.721668+00');


--
-- Data for Name: usage_ledger; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.usage_ledger VALUES (1, 'req-4ed678b427b645d0a3b3d3c6c4b2f1db', 'key_e0036e9c2bfb4fa5ab54beb3', 'team-active', 'deepseek-v4-flash-0731', '/v1/chat/completions', false, '2026-12-04 02:32:37.124139+00', 200, 'length', false, 9, 16, 0, 16, 0, NULL, NULL, NULL, 0.19781077400011782, '{"source":"metrics_delta","steps":4,"accepted_tokens":11,"draft_tokens":20,"acceptance_rate":0.55,"mean_acceptance_length":3.75,"exact":true}', '[{"source":"metrics_delta","steps":4,"accepted_tokens":11,"draft_tokens":20,"acceptance_rate":0.55,"mean_acceptance_length":3.75,"exact":true}]');
INSERT INTO public.usage_ledger VALUES (2, 'req-b056c625eda74f969b2e10809833fe9a', 'key_e0036e9c2bfb4fa5ab54beb3', 'team-active', 'deepseek-v4-flash-0731', '/v1/chat/completions', true, '2026-12-04 02:32:37.32091+00', 200, 'length', false, 9, 16, 0, 16, 0, 0.025971375999915836, 0.025508115999855363, 84.44966310826042, 0.20591128099999878, '{"source":"metrics_delta","steps":4,"accepted_tokens":11,"draft_tokens":20,"acceptance_rate":0.55,"mean_acceptance_length":3.75,"exact":true}', '[{"source":"metrics_delta","steps":4,"accepted_tokens":11,"draft_tokens":20,"acceptance_rate":0.55,"mean_acceptance_length":3.75,"exact":true},{"source":"stream","steps":4,"accepted_tokens":11,"draft_tokens":20,"acceptance_rate":0.55,"mean_acceptance_length":3.75}]');
INSERT INTO public.usage_ledger VALUES (3, 'req-50427dc8a40e4c7e8a0c21a0003dc744', 'key_e0036e9c2bfb4fa5ab54beb3', 'team-active', 'deepseek-v4-flash-0731', '/v1/responses', false, '2026-12-04 02:32:37.528619+00', 200, 'length', false, 9, 16, 0, 16, 0, NULL, NULL, NULL, 0.20080337500007772, '{"source":"metrics_delta","steps":4,"accepted_tokens":11,"draft_tokens":20,"acceptance_rate":0.55,"mean_acceptance_length":3.75,"exact":true}', '[{"source":"metrics_delta","steps":4,"accepted_tokens":11,"draft_tokens":20,"acceptance_rate":0.55,"mean_acceptance_length":3.75,"exact":true}]');


--
-- Name: audit_log_id_seq; Type: SEQUENCE SET; Schema: public; Owner: -
--

SELECT pg_catalog.setval('public.audit_log_id_seq', 3, true);


--
-- Name: usage_ledger_id_seq; Type: SEQUENCE SET; Schema: public; Owner: -
--

SELECT pg_catalog.setval('public.usage_ledger_id_seq', 3, true);


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
-- Name: response_owners response_owners_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.response_owners
    ADD CONSTRAINT response_owners_pkey PRIMARY KEY (response_id);


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
-- Name: ix_response_owners_key_id; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ix_response_owners_key_id ON public.response_owners USING btree (key_id);


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


