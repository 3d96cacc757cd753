// What the pages of a server share: the two addresses they build on (its console URL, its
// record in the admin API) and the statuses they name. Kept apart from routes.js, which loads
// the pages, so that no page imports back the module that imports it.
import { INBOUND_STATUSES, MESSAGE_STATUSES } from '../../generated/rules.js';

export const serverBase = (ctx) => `/orgs/${encodeURIComponent(ctx.params.org)}/servers/${encodeURIComponent(ctx.params.server)}`;
export const adminBase = (ctx) => `/admin/organizations/${encodeURIComponent(ctx.params.org)}/servers/${encodeURIComponent(ctx.params.server)}`;

// A status a page treats specially, checked against the service's vocabulary when the page
// module loads: a name the service no longer has is reported, not silently never matched.
function known(vocabulary, kind) {
  return (name) => {
    if (!vocabulary.includes(name)) console.error(`${name} is not a ${kind} status of this service`);
    return name;
  };
}
export const messageStatus = known(MESSAGE_STATUSES, 'message');
export const inboundStatus = known(INBOUND_STATUSES, 'inbound message');
