-- A tenant's approver key (issue 26, breach 3): the only key whose tokens
-- approve or reject commands that wait for approval. It is not the main
-- key, which a gateway holds: a gateway must not be able to approve its
-- own requests. NULL: none registered, and nothing can be approved.
ALTER TABLE tenants ADD COLUMN approver_alg TEXT CHECK (approver_alg IN ('HS256', 'RS256', 'ES256'));
ALTER TABLE tenants ADD COLUMN approver_key BLOB;
