"""Keys and tokens for the JWT tests (tests/it/auth.rs), made by PyJWT.

Reads a JSON spec on stdin:
  {"keys": [{"kid": "a", "kind": "rsa" | "ec" | "hmac"}],
   "tokens": [{"name": "ok", "kid": "a", "alg": "RS256", "claims": {...},
               "exp_in": 300}]}
and prints {"jwks": {kid: public JWK}, "tokens": {name: token}}.
"exp_in" (seconds from now; negative: expired) sets "exp"; "alg": "none"
makes an unsigned token; a token's "kid": null leaves the kid out.
"""

import json
import secrets
import sys
import time

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm


def make_key(kind):
    if kind == "rsa":
        priv = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        jwk = json.loads(RSAAlgorithm.to_jwk(priv.public_key()))
        jwk["alg"] = "RS256"
        return priv, jwk
    if kind == "ec":
        priv = ec.generate_private_key(ec.SECP256R1())
        jwk = json.loads(ECAlgorithm.to_jwk(priv.public_key()))
        jwk["alg"] = "ES256"
        return priv, jwk
    if kind == "hmac":
        secret = secrets.token_bytes(32)
        k = jwt.utils.base64url_encode(secret).decode()
        return secret, {"kty": "oct", "k": k, "alg": "HS256"}
    raise SystemExit(f"unknown key kind {kind}")


def main():
    spec = json.load(sys.stdin)
    private, jwks = {}, {}
    for k in spec.get("keys", []):
        priv, jwk = make_key(k["kind"])
        jwk["kid"] = k["kid"]
        jwk["use"] = "sig"
        private[k["kid"]] = priv
        jwks[k["kid"]] = jwk
    tokens = {}
    now = int(time.time())
    for t in spec.get("tokens", []):
        claims = dict(t.get("claims", {}))
        if "exp_in" in t:
            claims["exp"] = now + t["exp_in"]
        kid = t.get("kid")
        headers = {"kid": kid} if kid is not None else None
        if t["alg"] == "none":
            token = jwt.encode(claims, None, algorithm="none", headers=headers)
        else:
            token = jwt.encode(claims, private[kid], algorithm=t["alg"], headers=headers)
        tokens[t["name"]] = token
    json.dump({"jwks": jwks, "tokens": tokens}, sys.stdout)


if __name__ == "__main__":
    main()
