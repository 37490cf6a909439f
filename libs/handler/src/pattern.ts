/**
 * The key under which a task handler's contract travels in its message pattern's extras: `@TaskHandler(contract)`
 * (@keyflow/nestjs) puts the contract there (`@nestjs/microservices`' MessagePattern, third argument), and the
 * worker's transport (@keyflow/workers) reads it back to check each command's input and the handler's output. A
 * plain string, so neither package imports the other.
 */
export const CONTRACT_EXTRA = 'keyflowContract';
