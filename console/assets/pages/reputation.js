// What receivers think of our mail: the reputation guard of a server (its bounce and
// complaint rates against the installation's thresholds, a warning, a pause and who lifted
// it) and infrastructure signals (refusals that blamed a sending address or domain: who said
// it, when, how often, their words). Shared by the server pages, the domains page and the
// IP pools page.
import { badge, dl, h, notice, section, table, when } from '../ui.js';

const STATE = { ok: ['OK', 'good'], warning: ['Warning', 'warn'], paused: ['Paused', 'bad'] };

/** The guard's state as a badge. */
export function reputationBadge(state) {
  const [label, kind] = STATE[state] || [state, ''];
  return badge(label, kind);
}

/** A banner for a server whose guard warns or paused it; null when all is well. */
export function reputationBanner(brief) {
  if (!brief || brief.state === 'ok') return null;
  const paused = brief.state === 'paused';
  return notice(`${paused ? 'Sending paused by the reputation guard' : 'Reputation warning'}`
    + `${brief.since ? ` since ${when(brief.since)}` : ''}: ${brief.reason || ''}`
    + `${paused ? '' : ' Clean the list of addresses that bounce or complain before the pause threshold is reached.'}`,
  paused ? 'error' : 'warn');
}

const pct = (n) => (n == null ? '—' : `${Number(n).toLocaleString(undefined, { maximumFractionDigits: 3 })}%`);

/** The guard's card on the settings page: figures, thresholds, findings, pause and lift. */
export function reputationCard(rep) {
  const t = rep.thresholds;
  const guard = { pause: 'warns, and pauses sending at the pause thresholds', warn: 'warns only', off: 'is off on this installation' }[rep.guard] || rep.guard;
  return section('Reputation', reputationBadge(rep.state),
    h('p', { class: 'help' }, `The reputation guard ${guard}. Rates over the last ${rep.window_hours} hours`
      + `${rep.lifted_at && rep.since === rep.lifted_at ? ' (since the pause was lifted)' : ''}, judged once ${rep.min_volume.toLocaleString()} messages were sent.`),
    dl([
      ['Bounce rate', h('span', {}, pct(rep.bounce_rate), ` · ${rep.bounces} bounces saying the address is bad, of ${rep.sent} messages sent`,
        h('span', { class: 'help' }, ` (warning at ${pct(t.bounce_warning)}, pause at ${pct(t.bounce_pause)})`))],
      ['Complaint rate', h('span', {}, pct(rep.complaint_rate), ` · ${rep.complaints} spam complaints, of ${rep.delivered} messages delivered`,
        h('span', { class: 'help' }, ` (warning at ${pct(t.complaint_warning)}, pause at ${pct(t.complaint_pause)})`))],
      ['Window from', when(rep.since)],
      ['Volume', rep.enough_volume ? 'enough to judge' : `not enough yet (${rep.sent} of ${rep.min_volume.toLocaleString()})`],
      ...(rep.paused_at ? [['Paused since', when(rep.paused_at)]] : []),
      ...(rep.warning_since && !rep.paused_at ? [['Warning since', when(rep.warning_since)]] : []),
      ...(rep.lifted_at ? [['Last lifted', `${when(rep.lifted_at)} by ${rep.lifted_by}`]] : []),
    ]),
    rep.findings.length ? h('ul', { class: 'findings' }, rep.findings.map((f) => h('li', {},
      badge(f.level === 'pause' ? 'pause' : 'warning', f.level === 'pause' ? 'bad' : 'warn'), ' ', f.message))) : null);
}

/** The refusals that blamed an address, a pool or a domain: counts and each receiver's latest
 * words; ``what`` names the thing in the sentence. */
export function signalHealth(health, what) {
  if (!health || !health.count) {
    return h('p', { class: 'help signals-none' }, `No refusal blamed ${what} in the last ${health ? health.window_hours : 24} hours.`);
  }
  const parts = [health.ip ? `${health.ip} blaming the IP address` : null, health.domain ? `${health.domain} blaming the domain` : null].filter(Boolean);
  return h('div', { class: 'signals' },
    notice(`${health.count} refusal${health.count === 1 ? '' : 's'} blamed ${what} in the last ${health.window_hours} hours (${parts.join(', ')}); the last ${when(health.last_at)}.`, 'warn'),
    table([
      { label: 'Receiver', render: (r) => r.receiver || '—' },
      { label: 'Refusals', class: 'num', render: (r) => String(r.count) },
      { label: 'Last', render: (r) => when(r.last_at) },
      { label: 'Reason', render: (r) => badge(r.latest.reason, r.latest.blames === 'ip' ? 'bad' : 'warn') },
      { label: 'From', render: (r) => r.latest.source_address || '—' },
      { label: 'What it said', class: 'wrap', render: (r) => h('code', {}, r.latest.text || '—') },
    ], health.receivers, { caption: `Refusals that blamed ${what}` }));
}

/** A one-word summary for a table cell: none, or the count as a badge. */
export function signalCount(health) {
  if (!health || !health.count) return badge('none', 'good');
  return badge(`${health.count} in ${health.window_hours} h`, 'bad');
}
