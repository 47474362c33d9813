'use strict';
// The contract's constants, from the core (bridge::contract_json): the error codes, the run
// statuses, the statuses a release may leave, the channels, the ttl bound, the operation
// names and the defaults of the options. The package takes them from here and keeps no copy.

const native = require('./native.cjs');

const contract = JSON.parse(native.contract());
for (const v of Object.values(contract)) if (v !== null && typeof v === 'object') Object.freeze(v);

module.exports = Object.freeze(contract);
