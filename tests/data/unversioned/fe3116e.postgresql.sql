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
    default_thinking character varying(8)
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
-- Name: usage_ledger id; Type: DEFAULT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.usage_ledger ALTER COLUMN id SET DEFAULT nextval('public.usage_ledger_id_seq'::regclass);


--
-- Data for Name: api_keys; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.api_keys VALUES ('key_1135065c3b624ff98c5dfa8a', 'team-revoked', 'c52590ccacd5ccf0eb4a244e316c78f351018ee13083ccc6159bd3366fefab16', 'dsk-t-K2…', '2026-12-04 02:30:38.438729+00', NULL, '2026-12-04 02:30:39.300071+00', NULL, 'null', '[]', NULL);
INSERT INTO public.api_keys VALUES ('key_aca6d8b482894f998e73a2cf', 'team-expired', '9f3d7f8b1034b56820ac3c68a0d7617a9355732964d06d8f3fb9a1bb5fbf20f4', 'dsk-gaEv…', '2026-12-04 02:30:40.14505+00', '2026-12-04 02:30:41.092664+00', NULL, NULL, 'null', '[]', NULL);
INSERT INTO public.api_keys VALUES ('key_ea77907f1ed5465b89d0aefb', 'team-active', 'bac92f2428369bff82f8e3e3a36213f8577dcd274524492dd9d1f2268f05c782', 'dsk-VaQE…', '2026-12-04 02:30:37.700481+00', '2036-12-01 02:30:37.623074+00', NULL, '2026-12-04 02:30:43.505019+00', '["deepseek-v4-flash-0731"]', '[]', 'high');
INSERT INTO public.api_keys VALUES ('key_1d5423aed651435f9e47a5a2', 'ops', 'aa21b961612f5d773f885e3d0dfb3ed36c444797d73087e4ca13cfe38f09c41a', 'dsk-_CnG…', '2026-12-04 02:30:40.895825+00', NULL, NULL, '2026-12-04 02:30:45.441425+00', 'null', '[]', NULL);


--
-- Data for Name: usage_ledger; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.usage_ledger VALUES (1, 'req-488114e802b742c2ba37091b70c0d895', 'key_ea77907f1ed5465b89d0aefb', 'team-active', 'deepseek-v4-flash-0731', '/v1/chat/completions', false, '2026-12-04 02:30:43.505246+00', 200, 'length', false, 9, 16, 0, 16, 0, NULL, NULL, NULL, 0.20284952799988787, '{"source": "metrics_delta", "steps": 4, "accepted_tokens": 11, "draft_tokens": 20, "acceptance_rate": 0.55, "mean_acceptance_length": 3.75, "exact": true}', '[{"source": "metrics_delta", "steps": 4, "accepted_tokens": 11, "draft_tokens": 20, "acceptance_rate": 0.55, "mean_acceptance_length": 3.75, "exact": true}]');
INSERT INTO public.usage_ledger VALUES (2, 'req-7818c82c4d2841f2911d8ac7312c776b', 'key_ea77907f1ed5465b89d0aefb', 'team-active', 'deepseek-v4-flash-0731', '/v1/chat/completions', true, '2026-12-04 02:30:43.710794+00', 200, 'length', false, 9, 16, 0, 16, 0, 0.030339350999838643, 0.030239852000022438, 89.653915445237, 0.20933111499994084, '{"source": "metrics_delta", "steps": 4, "accepted_tokens": 11, "draft_tokens": 20, "acceptance_rate": 0.55, "mean_acceptance_length": 3.75, "exact": true}', '[{"source": "metrics_delta", "steps": 4, "accepted_tokens": 11, "draft_tokens": 20, "acceptance_rate": 0.55, "mean_acceptance_length": 3.75, "exact": true}, {"source": "stream", "steps": 4, "accepted_tokens": 11, "draft_tokens": 20, "acceptance_rate": 0.55, "mean_acceptance_length": 3.75}]');


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
-- Name: usage_ledger usage_ledger_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.usage_ledger
    ADD CONSTRAINT usage_ledger_pkey PRIMARY KEY (id);


--
-- Name: ix_api_keys_key_hash; Type: INDEX; Schema: public; Owner: -
--

CREATE UNIQUE INDEX ix_api_keys_key_hash ON public.api_keys USING btree (key_hash);


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


