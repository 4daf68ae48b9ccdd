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
    scopes json NOT NULL
);


--
-- Data for Name: api_keys; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.api_keys VALUES ('key_18a6126629834fdfbfd365ec', 'team-revoked', 'c58e1831d3e82c7224a4919e3a100d8b53716e9880ba7bd0546731454e5460e9', 'dsk-rg4p…', '2026-12-04 02:28:00.171823+00', NULL, '2026-12-04 02:28:01.07019+00', NULL, 'null', '[]');
INSERT INTO public.api_keys VALUES ('key_0cf92443dc9d4b96814b9476', 'team-expired', '193dc671fe615d841d33ae6232f75dba9e6918a473754c66c5daeae1f16ee4a8', 'dsk-P0R6…', '2026-12-04 02:28:01.900372+00', '2026-12-04 02:28:02.840787+00', NULL, NULL, 'null', '[]');
INSERT INTO public.api_keys VALUES ('key_9a148780e4454f9ca4c9516d', 'team-active', 'b4f2fd6caaf592f940323e59607a7c3e8afac81b2f11c6a4237f02a0684757be', 'dsk-xi-o…', '2026-12-04 02:27:59.362303+00', '2036-12-01 02:27:59.293471+00', NULL, '2026-12-04 02:28:04.501304+00', '["deepseek-v4-flash-0731"]', '[]');


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
-- Name: ix_api_keys_key_hash; Type: INDEX; Schema: public; Owner: -
--

CREATE UNIQUE INDEX ix_api_keys_key_hash ON public.api_keys USING btree (key_hash);


--
-- PostgreSQL database dump complete
--


