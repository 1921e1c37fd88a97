-- Issue 9: an artifact may name the public key its signature must verify with (sigstore); the hosts
-- that pull it enforce that key in their containers policy.

ALTER TABLE artifacts ADD COLUMN signer_public_key text;
