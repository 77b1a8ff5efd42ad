/** The workflows a node registers; loaded by path (workflowsPath), never imported by node code. */
export { job } from './job';
export { tenantPolicy } from './policy';
export { probeCancelPush } from './probe';
