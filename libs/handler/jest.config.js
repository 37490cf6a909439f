const { unit, root } = require('../../jest.preset');
module.exports = { ...root, projects: [unit(__dirname)] };
