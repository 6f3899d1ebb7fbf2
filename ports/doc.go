// Package ports holds the contracts between the domain core and the world
// around it, as Go interfaces with plain request and response types.
//
// Driving ports are what the outbox offers to the outside; the core
// implements them:
//   - [Outbox]: central, for the site link, the operator API, the CLI and the
//     acceptance tests; it embeds [Central], the part a site sees
//     (core.Service);
//   - [Operators]: operator accounts, sessions and API tokens (core.Operators);
//   - [DirectoryEditor]: changes to the lists and channel settings, recorded
//     in the admin audit log (core.DirectoryEditor);
//   - [Site]: a site node, for the site API and the CLI (core.Site).
//
// Driven ports are what the core needs from the outside; adapters implement
// them:
//   - [Store] and [AuditLog]: the notifications and their history;
//   - [Directory] and [DirectoryAdmin]: the lists and channel settings;
//   - [AccountStore] and [AdminAudit]: operator accounts and the record of
//     administrative changes;
//   - [Channel] and [ChannelRegistry]: delivery through the channel plugins;
//   - [Buffer]: a site's replicated store-and-forward buffer;
//   - [Central]: central as a site's forwarder sees it (the site link's
//     client);
//   - [Clock] and the optional [DeliveryObserver]: the time, and the report
//     of each delivery attempt.
//
// Every type here is plain Go. No SQL, gRPC, protobuf or driver type crosses a
// port. Each port that keeps or carries data has one exported contract suite
// that every implementation runs against its real backend: ports/storetest
// ([Store], [AuditLog]), ports/directorytest ([DirectoryAdmin]),
// ports/accountstest ([AccountStore]), ports/adminaudittest ([AdminAudit]),
// ports/buffertest ([Buffer]) and ports/centraltest ([Central]); a channel
// plugin runs plugins/channel/v1/plugintest. ports/clocktest is a [Clock]
// that tests move by hand.
//
// All times are UTC. A zero [time.Time] means "unset" and is stored as NULL.
// Stores keep at least microsecond precision.
package ports
