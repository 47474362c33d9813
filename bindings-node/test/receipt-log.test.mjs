// verifyReceipts of the Node package against the CLI (bindings-node/test/helpers/receipt-log.mjs).

import { verifyReceipts } from '../index.mjs';
import { receiptLogSuite } from './helpers/receipt-log.mjs';

receiptLogSuite({ verifyReceipts, binding: 'heart-fleet' });
