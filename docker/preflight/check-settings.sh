#!/bin/sh
# Run by compose.yaml's `preflight` service before PostgreSQL starts: every other service waits for
# PostgreSQL, so a refusal here keeps the whole deployment down. Compose's ${VAR:?} can demand a value
# but not refuse one, and .env.example's placeholder is a value: a copied .env left as it is would
# otherwise initialise the database with a password anyone can read in this repository.
# Never prints the password.
case "${POSTGRES_PASSWORD}" in
    "" | change-me)
        echo "refusing to start: POSTGRES_PASSWORD in docker/.env is empty or still change-me; set a long random one (openssl rand -hex 24)" >&2
        exit 1
        ;;
esac
