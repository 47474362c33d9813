// The edge build's stand-in for the receipt-log verifier's glue (build.mjs resolves
// `heart-fleet-receipts-glue` to this file in pkg-edge/): no initSync, so js/init.mjs
// loads no second module and verifyReceipts says it is not in the edge build.
export const initSync = null;
export const verifyReceiptsJson = null;
