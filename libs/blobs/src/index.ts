export * from './errors';
export * from './store';
export * from './fs-store';
export * from './pg-store';
export * from './retention';
export * from './config';
export * from './claim-check';
export * from './sweeper';
