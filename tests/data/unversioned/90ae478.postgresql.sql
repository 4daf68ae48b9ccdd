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
-- Data for Name: api_keys; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.api_keys VALUES ('key_0405769c45354ccf9ba298c9', 'team-revoked', '81d5f5959e4183893b642bebe6a4a5d027bb2f2ef847f09423a11569ef151534', 'dsk-yYXv…', '2026-12-04 02:28:38.647782+00', NULL, '2026-12-04 02:28:39.420048+00', NULL, 'null', '[]', NULL);
INSERT INTO public.api_keys VALUES ('key_85f91b7b6ad34e5f914d0235', 'team-expired', '67a528c9b0c3a537c6bf9503e0f6172e6f1e6074e0f51956debbd8a31f7e15ff', 'dsk-N0DR…', '2026-12-04 02:28:40.170524+00', '2026-12-04 02:28:41.116224+00', NULL, NULL, 'null', '[]', NULL);
INSERT INTO public.api_keys VALUES ('key_74967aaf0770413cbcb3ec7b', 'team-active', '4de62c3800e4d39ef23c31fbc24e4781b3c129c9072741db00673776f5a4590e', 'dsk-DvwN…', '2026-12-04 02:28:37.979323+00', '2036-12-01 02:28:37.918605+00', NULL, '2026-12-04 02:28:42.836906+00', '["deepseek-v4-flash-0731"]', '[]', 'high');


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


