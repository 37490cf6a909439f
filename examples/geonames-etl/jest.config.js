const { unit, integration, root } = require('../../jest.preset');
module.exports = { ...root, projects: [unit(__dirname), integration(__dirname)] };
