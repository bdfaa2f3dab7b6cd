// A small orchestration state at a durable pause: three tool results held in locals and a
// closure, then a wait for a human's approval.
const plan = await tools.call('plan', {goal: 'rotate the api keys of three services'});
const checks = await Promise.all(plan.steps.map((s) => tools.call('check', {service: s})));
const summary = checks.map((c, i) => `${plan.steps[i]}: ${c.status}`).join('; ');
const remember = (x) => { remember.log.push(x); return remember.log.length; };
remember.log = [summary];
const approval = await tools.call('human_approval', {action: 'rotate keys', summary});
remember(approval.approved);
return {summary, approved: approval.approved, log: remember.log};
