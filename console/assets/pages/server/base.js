// The two addresses every page of a server builds on: its console URL and its record in the
// admin API. Kept apart from routes.js, which loads the pages, so that no page imports back
// the module that imports it.
export const serverBase = (ctx) => `/orgs/${encodeURIComponent(ctx.params.org)}/servers/${encodeURIComponent(ctx.params.server)}`;
export const adminBase = (ctx) => `/admin/organizations/${encodeURIComponent(ctx.params.org)}/servers/${encodeURIComponent(ctx.params.server)}`;
