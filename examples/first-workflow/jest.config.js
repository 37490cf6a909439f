const { integration, root } = require('../../jest.preset');
module.exports = { ...root, projects: [integration(__dirname)] };
