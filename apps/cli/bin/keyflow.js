#!/usr/bin/env node
// The workspace's packages are TypeScript run through @swc-node/register, like the services.
require('@swc-node/register');
require('../src/main.ts');
