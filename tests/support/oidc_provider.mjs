// A real OpenID Connect provider for the console's sign-in tests: panva's oidc-provider (an OpenID
// Certified implementation) with its development login form, which takes any login and password.
// Arguments: the path of oidc-provider's lib/index.js, then a JSON object {port, client_id,
// client_secret, redirect_uris, id_token_ttl_s}. Accounts: a login that starts with "admin" is in the group
// "gateway-admins", any other in "staff"; its email is <login>@example.test.
const [modulePath, json] = process.argv.slice(2);
const { default: Provider } = await import(modulePath);
const config = JSON.parse(json);
const provider = new Provider(`http://127.0.0.1:${config.port}`, {
  clients: [{
    client_id: config.client_id,
    client_secret: config.client_secret,
    redirect_uris: config.redirect_uris,
    grant_types: ["authorization_code"],
    response_types: ["code"],
  }],
  pkce: { required: () => true },
  ttl: { IdToken: config.id_token_ttl_s },
  features: { devInteractions: { enabled: true } },
  scopes: ["openid", "email", "profile", "groups"],
  claims: { openid: ["sub"], email: ["email"], groups: ["groups"] },
  conformIdTokenClaims: false, // the groups claim in the ID token itself, as most providers can be set to
  findAccount: (ctx, id) => ({
    accountId: id,
    claims: () => ({ sub: id, email: `${id}@example.test`, groups: id.startsWith("admin") ? ["gateway-admins"] : ["staff"] }),
  }),
});
provider.listen(config.port, "127.0.0.1", () => console.log(`oidc-provider on ${config.port}`));
